-- Each m.mode returns one shape of the `report` action, good or bad (test_policy.c).
function on_epoch_end(m)
  local mode = m.mode
  if mode == 1 then return {report = {zeta = 2, alpha = {0.5, "s"}, mid = {3}}} end
  if mode == 2 then return {report = 7} end
  if mode == 3 then return {report = {["bad name"] = 1}} end
  if mode == 4 then return {report = {x = "high"}} end
  if mode == 5 then return {report = {x = {1, 2}}} end
  if mode == 6 then return {report = {x = {1, string.rep("u", 30)}}} end
  if mode == 7 then return {report = {x = {"1"}}} end
end
