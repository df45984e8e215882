-- A syntax error: the table opened on line 3 is never closed ('end' on line 4).
function on_epoch_end(m)
  return {stop = m.epoch > 1
end
