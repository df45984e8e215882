-- Run-time errors, reported with their lines; m.mode picks one.
function on_epoch_end(m)
  if m.mode == 1 then
    error("boom")
  end
  return {lr = m.missing + 1}
end
