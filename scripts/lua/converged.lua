-- converged.lua: stop when training has converged, as Dorylus §7.3 defines it ("the
-- difference of the model accuracy between consecutive epochs is within 0.001"), or when
-- the accuracy reaches a target (the same experiment's way of timing another mode to the
-- accuracy the first reached).
--
-- params (policy.params in the run's YAML):
--   delta    converged: |change of val_accuracy| < delta ...              (default 0.001)
--   window   ... for this many consecutive epochs (a single still epoch   (default 5)
--            early on is not convergence: Cora's accuracy moves in steps of 0.002)
--   target   if set: stop as soon as val_accuracy >= target instead        (default none)
--
-- Reads val_accuracy and epoch in on_epoch_end. Returns {stop = true, reason = ...} when
-- it fires. No time or randomness: a resumed run rebuilds the state by replay.

local delta = params.delta or 0.001
local window = math.tointeger(params.window or 5)
local target = params.target

if type(delta) ~= "number" or delta <= 0 then
  error(("params.delta must be a number > 0, got %s"):format(tostring(params.delta)))
end
if not window or window < 1 then
  error(("params.window must be a positive integer, got %s"):format(tostring(params.window)))
end
if target ~= nil and (type(target) ~= "number" or target <= 0 or target > 1) then
  error(("params.target must be an accuracy in (0, 1], got %s"):format(tostring(target)))
end

local last, still = nil, 0

function on_epoch_end(m)
  local acc = m.val_accuracy
  if target then
    if acc >= target then
      return {stop = true, reason = ("reached the target accuracy %.4f (val %.4f at epoch %d)")
                                    :format(target, acc, m.epoch)}
    end
    return nil
  end
  if last and math.abs(acc - last) < delta then
    still = still + 1
  else
    still = 0
  end
  last = acc
  if still >= window then
    return {stop = true, reason = ("converged: val_accuracy changed by less than %g for %d "
                                   .. "epochs (%.4f at epoch %d)"):format(delta, window, acc, m.epoch)}
  end
end
