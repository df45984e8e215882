-- autotune_lambdas.lua: Dorylus's autotuner of the number of Lambdas (§6), for runs whose
-- tensor tasks run on functions (compute: {plugin: lambda}; docs/lambda.md).
--
-- The run starts with compute.lambdas workers per graph server (0, the default: one per
-- vertex interval, as Dorylus's min(#intervals, 100)). After each epoch this policy reads
-- how the graph servers' work and the workers kept pace, from the epoch's series:
--   lambda_queue_mean  tasks the graph servers had ready that waited for a worker (on
--                      average while tasks were out): the workers are the bottleneck, the
--                      graph work outruns them: scale up;
--   lambda_idle_mean   warm workers with nothing to do while tasks were out: the graph
--                      servers cannot feed them (Dorylus: "the CPU's task queue grows"):
--                      scale down.
-- It moves only on a signal seen two epochs running (a single epoch's figures are noisy
-- on a shared machine), so that the queue settles, and sets the knob compute.lambdas,
-- which the graph servers apply from the next epoch on.
--
-- params (policy.params in the run's YAML):
--   min        the fewest workers                                     (default 1)
--   max        the most (at most compute.max_lambdas)                 (default 32)
--   queue      a mean queue above this is "waiting for workers"        (default 0.5)
--   idle       a mean of idle workers above this is "too many"         (default 1)
--
-- Reports `autotune_target`, the count it asked for, every epoch. No time or randomness:
-- a resumed run rebuilds the state by replay.

local lo = math.tointeger(params.min or 1)
local hi = math.tointeger(params.max or 32)
local queue_high = params.queue or 0.5
local idle_high = params.idle or 1

if not lo or lo < 1 then
  error(("params.min must be an integer >= 1, got %s"):format(tostring(params.min)))
end
if not hi or hi < lo then
  error(("params.max must be an integer >= min, got %s"):format(tostring(params.max)))
end
if type(queue_high) ~= "number" or queue_high < 0 then
  error(("params.queue must be a number >= 0, got %s"):format(tostring(params.queue)))
end
if type(idle_high) ~= "number" or idle_high < 0 then
  error(("params.idle must be a number >= 0, got %s"):format(tostring(params.idle)))
end

local last_signal = nil -- "up", "down" or nil: what the epoch before said

function on_tick(m)
  local n = m.lambdas
  if n == nil then
    error("autotune_lambdas.lua: this run reports no 'lambdas' series: its tensor tasks "
          .. "do not run on functions (compute: {plugin: lambda})")
  end
  n = math.tointeger(n) or math.floor(n)
  local signal = nil
  if m.lambda_queue_mean > queue_high and m.lambda_queue_mean >= m.lambda_idle_mean then
    signal = "up"
  elseif m.lambda_idle_mean > idle_high then
    signal = "down"
  end
  local want = n
  if signal and signal == last_signal then
    if signal == "up" then
      want = n + math.max(1, n // 2)
    else
      want = n - math.max(1, math.floor(m.lambda_idle_mean / 2))
    end
  end
  last_signal = signal
  want = math.max(lo, math.min(hi, want))
  if want ~= n then
    return {set = {["compute.lambdas"] = want}, report = {autotune_target = want}}
  end
  return {report = {autotune_target = n}}
end
