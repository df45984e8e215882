-- value.lua: raise the value (samples per second per dollar an hour) of a pipeline run on
-- spot nodes online, by choosing the instance type, and the pipelines' depth and width
-- from the nodes it has (issue 16; docs/simulation.md#a-policy-that-raises-value).
--
-- Every node up is paid for, used or not, so the value of the nodes one has is highest
-- in the layout that trains the most samples a second on them. Bamboo fixes the depth at
-- P = 1.5 x P_demand, so that each node's memory holds its stage and the replica eager
-- FRC keeps of the next one, and runs as many such pipelines as the nodes fill. This
-- policy lays the nodes up out in whichever depth, width and redundancy mode give the
-- most samples a second by the workload model `bivouac simulate` uses (its inputs come
-- with every event): eager FRC at min_stages or more, or, where the model has lazy FRC's
-- figures (simulate.lflb_rc_overhead), lazy FRC, which keeps no replica in memory, at
-- lazy_min_stages (P_demand) or more. Where the run may use several instance types
-- (simulate.instances), it starts on the one whose fastest layout of the nodes asked for
-- trains the most samples a second per dollar an hour, and moves to another when that one
-- promises more than `switch_gain` above what the current one has given (measured from
-- the run's first step on it, once that is `measure_hours` old: preemptions, pauses and
-- restarts lower it); a type once left is judged by what it gave. A move gives every node
-- back and waits for new ones. It reconfigures when a join or a loss makes another layout
-- faster by more than `gain` (a reconfiguration pauses the pipelines), and otherwise
-- decides as Bamboo's policy does (scripts/lua/reconfigure.lua): fail over what the
-- replicas cover, give a stage on a shadow a node that joined, reconfigure a pipeline
-- close to a fatal failure.
--
-- Events (bivouac simulate; a real run raises preempted, joined and degraded without the
-- layout figures, and this policy then decides as reconfigure.lua does):
--   on_layout(m)     the nodes up are laid out afresh:
--                    {set = {stages = P, pipelines = D, lazy = 0|1, instance = K}} (K: the
--                    type's number in m, instance_K_step and instance_K_usd_per_hour, where
--                    m.instance_types > 1; m.nodes is 0 before the run has asked for any
--                    node); in a graph run
--                    (m.graph = 1), at every start: {set = {lambdas = L}}, the function
--                    count whose epochs have the most value 1 / (T C) by the model
--   on_preempted(m), on_joined(m), on_degraded(m): as reconfigure.lua's
--
-- params (policy.params in the run's YAML):
--   min_stages   the smallest depth that holds the model and eager FRC's replicas
--                                                               (default: the experiment's)
--   lazy_min_stages  the smallest that holds the model alone (P_demand); unset: lazy FRC
--                is not considered
--   max_stages   the largest depth worth trying             (default: 4 x the smallest)
--   gain         how much faster another layout must be to reconfigure for it (0.05)
--   switch_gain  how much more value another instance type must promise to move to it (0.25)
--   measure_hours  how long the run is on a type before what it gave counts (1)
--   reconfigure_at  as reconfigure.lua's: the fraction of active stages without a replica
--                above which the pipelines are reconfigured (0.05)

local gain = params.gain or 0.05
local switch_gain = params.switch_gain or 0.25
local measure_hours = params.measure_hours or 1
local measured = {} -- the value each instance type gave while the run was on it
local promised = {} -- the value each one's fastest layout of the nodes asked for gives
local reconfigure_at = params.reconfigure_at or 0.05

-- One pipeline's step at profile_stages on the run's instance type now.
local function base_step(m)
  if m.instance then return m["instance_" .. m.instance .. "_step"] end
  return m.profile_step
end

-- A step of d pipelines of p stages (docs/simulation.md, "The workload model"): the
-- slowest stage holds ceil(L / p) of the model's L layers; lazy: under lazy FRC; base:
-- one pipeline's step at profile_stages on the instance type (default: the run's now).
local function step(m, p, d, lazy, base)
  local share = m.profile_stages / p
  if m.layers > 0 then
    share = math.ceil(m.layers / p) / math.ceil(m.layers / m.profile_stages)
  end
  local t = (base or base_step(m)) * share * (m.microbatches + p - 1) /
            (m.microbatches + m.profile_stages - 1)
  t = t * (lazy == 1 and m.lflb_rc_factor or m.rc_factor)
  if d > 1 then
    t = t + 2 * (d - 1) / d * m.allreduce_mb * 8 / 1000 / m.bandwidth_gbps
  end
  return t
end

local function throughput(m, p, d, lazy, base)
  if d < 1 then return 0 end
  return d * m.samples_per_step / step(m, p, d, lazy, base)
end

-- The fastest layout of n nodes: its depth, width, mode (lazy: 1) and samples per second.
-- Eager FRC keeps a replica of the next stage's layers on each node: it needs
-- min_stages; lazy FRC keeps none, and needs lazy_min_stages.
local fastest = {} -- best's answers by nodes and step: its other inputs do not change
local function best(m, n, base)
  base = base or base_step(m)
  local key = n .. "/" .. base
  local f = fastest[key]
  if f then return f[1], f[2], f[3], f[4] end
  local bp, bd, bl, bt = m.stages_asked, 0, 0, 0
  local modes = {{0, params.min_stages or m.stages_asked}}
  if m.lflb_rc_factor > 0 and params.lazy_min_stages then
    modes[2] = {1, params.lazy_min_stages}
  end
  for _, mode in ipairs(modes) do
    local lazy, lo = mode[1], mode[2]
    for p = lo, math.min(params.max_stages or 4 * lo, n) do
      local d = n // p
      local t = throughput(m, p, d, lazy, base)
      if t > bt then bp, bd, bl, bt = p, d, lazy, t end
    end
  end
  fastest[key] = {bp, bd, bl, bt}
  return bp, bd, bl, bt
end

-- Whether the nodes up would train faster enough in another layout.
local function better(m)
  if m.profile_step == nil then return false end -- a real run: no layout figures
  local _, _, _, t = best(m, m.nodes)
  return t > (1 + gain) * throughput(m, m.stages, m.pipelines, m.lazy)
end

-- A graph run (Dorylus): an epoch with L functions per graph server, and what it costs:
-- the servers for its time and the invocations for theirs, rounded up to the billing
-- unit (docs/simulation.md, "Graph runs").
local function epoch(m, l)
  local task = m.task_seconds
  if m.lambda_capacity > 0 and l > m.lambda_capacity then
    task = task * l / m.lambda_capacity
  end
  local t = m.graph_seconds + m.tensor_stages * math.ceil(m.intervals / l) * task
  local unit = m.lambda_billing_ms / 1000
  local billed = task
  if unit > 0 and m.task_exponential == 1 then
    billed = unit / (1 - math.exp(-unit / task)) -- the mean of exponential times rounded up
  elseif unit > 0 then
    billed = math.ceil(task / unit - 1e-9) * unit
  end
  local calls = m.graph_servers * m.tensor_stages * m.intervals
  local usd = m.servers * m.server_usd_per_hour * t / 3600 +
              calls * (m.lambda_usd_per_request + billed * m.lambda_memory_gb *
                       m.lambda_usd_per_gb_second)
  return t, usd
end

-- The function count of the most value, 1 / (T C) (Dorylus section 7): from 1 to
-- params.max_lambdas (default: the intervals, a stage's tasks).
local function best_lambdas(m)
  local bl, bv = 1, 0
  for l = 1, params.max_lambdas or m.intervals do
    local t, usd = epoch(m, l)
    local v = 1 / (t * usd)
    if v > bv * (1 + 1e-9) then bl, bv = l, v end
  end
  return bl
end

-- The instance type to run on: the one whose fastest layout of the nodes asked for
-- trains the most samples a second per dollar an hour (or, for a type the run has been
-- on, the value it gave), where it beats the current one by more than switch_gain (by
-- anything before the run has a node).
local function best_instance(m)
  if m.nodes > 0 and m.instance_hours >= measure_hours then
    measured[m.instance] = m.instance_value
  end
  local n = m.nodes_asked
  local function value(k)
    if measured[k] then return measured[k] end
    if not promised[k] then -- the same inputs at every event of a run
      local _, _, _, t = best(m, n, m["instance_" .. k .. "_step"])
      promised[k] = t / (n * m["instance_" .. k .. "_usd_per_hour"])
    end
    return promised[k]
  end
  local bk, bv = m.instance, value(m.instance) * (1 + (m.nodes > 0 and switch_gain or 0))
  for k = 1, m.instance_types do
    local v = value(k)
    if v > bv then bk, bv = k, v end
  end
  return bk
end

function on_layout(m)
  if m.graph == 1 then
    return {set = {lambdas = best_lambdas(m)}}
  end
  local p, d, lazy = best(m, m.nodes)
  local set = {stages = p, pipelines = d, lazy = lazy}
  if m.instance then set.instance = best_instance(m) end
  return {set = set}
end

function on_preempted(m)
  if m.coverable == 1 then
    return {reconfigure = "failover"}
  end
  if m.reconfigurable == 1 then
    return {reconfigure = "reconfigure",
            reason = "two consecutive stages lost: laid out afresh from a whole pipeline"}
  end
  return {reconfigure = "restart", reason = "two consecutive stages lost: no replica of both"}
end

-- Whether the run should move to another instance type (simulate.instances).
local function move(m)
  return m.reconfigurable == 1 and m.instance ~= nil and best_instance(m) ~= m.instance
end

function on_joined(m)
  if move(m) then
    return {reconfigure = "grow", reason = "another instance type gives more value"}
  end
  if m.reconfigurable == 1 and better(m) then
    return {reconfigure = "grow", reason = "another layout trains faster on the nodes up"}
  end
  if m.degraded > 0 then
    return {reconfigure = "replace", reason = "full pipelines first"}
  end
  if m.reconfigurable == 1 and m.profile_step == nil then -- a real run: as reconfigure.lua
    if m.pipelines_possible > m.pipelines then
      return {reconfigure = "grow", reason = "standby nodes fill another pipeline"}
    end
    if m.stages_possible > m.stages then
      return {reconfigure = "grow", reason = "standby nodes deepen the pipelines again"}
    end
  end
  return {reconfigure = "wait"}
end

function on_degraded(m)
  if m.reconfigurable ~= 1 then
    return
  end
  if move(m) then
    return {reconfigure = "reconfigure", reason = "another instance type gives more value"}
  end
  if better(m) then
    return {reconfigure = "reconfigure", reason = "another layout trains faster on the nodes up"}
  end
  if 2 * m.degraded / m.stages_active > reconfigure_at then
    return {reconfigure = "reconfigure",
            reason = string.format("%d of %d active stages without a replica", 2 * m.degraded,
                                   m.stages_active)}
  end
end
