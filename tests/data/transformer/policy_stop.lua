-- policy_stop.lua: stops a transformer run after step `at` (on_step_end), or at the first
-- evaluation whose val_loss is above `val_above` (on_eval_end). For transformer_policy.sh.
local at = math.tointeger(params.at or 0)
local val_above = params.val_above

function on_step_end(m)
  if m.step == at then
    return {stop = true, reason = "step " .. m.step}
  end
end

function on_eval_end(m)
  if val_above and m.val_loss > val_above then
    return {stop = true, reason = string.format("val_loss %.2f at step %d", m.val_loss, m.step)}
  end
end
