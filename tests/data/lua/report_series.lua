-- report_series.lua: reports two series after every epoch through the `report` action,
-- one with a unit and one without (plots.sh).
function on_epoch_end(m)
  return {report = {patience_left = {10 - m.epoch % 10, "epochs"}, val_gap = m.val_loss - m.train_loss}}
end
