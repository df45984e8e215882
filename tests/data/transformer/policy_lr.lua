-- policy_lr.lua: sets the learning rate to `lr` after step `at`: the steps after it train
-- with that rate instead of the schedule's. For transformer_policy.sh.
local at = math.tointeger(params.at)
local lr = params.lr

function on_step_end(m)
  if m.step == at then
    return {lr = lr}
  end
end
