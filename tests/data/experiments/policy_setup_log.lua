-- Logs one line from its set-up (the top level) and one per epoch.
log("set up with patience", params.patience)

function on_epoch_end(m)
  log("epoch", m.epoch)
end
