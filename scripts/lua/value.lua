-- value.lua: raise the value (samples per second per dollar an hour) of a pipeline run on
-- spot nodes online, by choosing the pipelines' depth and width from the nodes it has
-- (issue 16; docs/simulation.md#a-policy-that-raises-value).
--
-- Every node up is paid for, used or not, so the value of the nodes one has is highest
-- in the layout that trains the most samples a second on them. Bamboo fixes the depth at
-- P = 1.5 x P_demand and runs as many such pipelines as the nodes fill: with N nodes up,
-- N mod P of them stand by, paid and idle, and after a loss the pipelines shrink by a
-- whole P. This policy lays the nodes out in whichever depth (at least min_stages, the
-- depth whose memory holds the model and its replicas) and width give the most samples a
-- second, by the workload model `bivouac simulate` uses (its inputs come with every
-- event), and reconfigures when a join or a loss makes another layout faster by more
-- than `gain` (a reconfiguration pauses the pipelines). Otherwise it decides as Bamboo's
-- policy does (scripts/lua/reconfigure.lua): fail over what the replicas cover, give a
-- stage on a shadow a node that joined.
--
-- Events (bivouac simulate; a real run raises preempted, joined and degraded without the
-- layout figures, and this policy then decides as reconfigure.lua does):
--   on_layout(m)     the nodes up are laid out afresh: {set = {stages = P, pipelines = D}}
--   on_preempted(m), on_joined(m), on_degraded(m): as reconfigure.lua's
--
-- params (policy.params in the run's YAML):
--   min_stages   the smallest depth that holds the model      (default: the experiment's)
--   max_stages   the largest depth worth trying                (default: 4 x min_stages)
--   gain         how much faster another layout must be to reconfigure for it (0.05)
--   reconfigure_at  as reconfigure.lua's: the fraction of active stages without a replica
--                above which the pipelines are reconfigured (0.05)

local gain = params.gain or 0.05
local reconfigure_at = params.reconfigure_at or 0.05

-- A step of d pipelines of p stages (docs/simulation.md, "The workload model"): the
-- slowest stage holds ceil(L / p) of the model's L layers.
local function step(m, p, d)
  local share = m.profile_stages / p
  if m.layers > 0 then
    share = math.ceil(m.layers / p) / math.ceil(m.layers / m.profile_stages)
  end
  local t = m.profile_step * share * (m.microbatches + p - 1) /
            (m.microbatches + m.profile_stages - 1) * m.rc_factor
  if d > 1 then
    t = t + 2 * (d - 1) / d * m.allreduce_mb * 8 / 1000 / m.bandwidth_gbps
  end
  return t
end

local function throughput(m, p, d)
  if d < 1 then return 0 end
  return d * m.samples_per_step / step(m, p, d)
end

-- The fastest layout of n nodes: its depth, width and samples per second.
local function best(m, n)
  local lo = params.min_stages or m.stages_asked
  local hi = params.max_stages or 4 * lo
  local bp, bd, bt = lo, 0, 0
  for p = lo, math.min(hi, n) do
    local d = n // p
    local t = throughput(m, p, d)
    if t > bt then bp, bd, bt = p, d, t end
  end
  return bp, bd, bt
end

-- Whether the nodes up would train faster enough in another layout.
local function better(m)
  if m.profile_step == nil then return false end -- a real run: no layout figures
  local _, _, t = best(m, m.nodes)
  return t > (1 + gain) * throughput(m, m.stages, m.pipelines)
end

function on_layout(m)
  local p, d = best(m, m.nodes)
  return {set = {stages = p, pipelines = d}}
end

function on_preempted(m)
  if m.coverable == 1 then
    return {reconfigure = "failover"}
  end
  return {reconfigure = "restart", reason = "two consecutive stages lost: no replica of both"}
end

function on_joined(m)
  if m.reconfigurable == 1 and better(m) then
    return {reconfigure = "grow", reason = "another layout trains faster on the nodes up"}
  end
  if m.degraded > 0 then
    return {reconfigure = "replace", reason = "full pipelines first"}
  end
  return {reconfigure = "wait"}
end

function on_degraded(m)
  if m.reconfigurable ~= 1 then
    return
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
