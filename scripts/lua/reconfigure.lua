-- reconfigure.lua: Bamboo's reconfiguration policy (NSDI '23, Appendix A), as bivouac's
-- pipeline engine offers it (docs/redundancy.md#reconfiguration-by-policy).
--
-- The events, raised where stages keep replicas (the `redundancy` strategy) and run as
-- processes, with what a handler may decide (`reconfigure = "..."`; the first is what
-- happens without a handler):
--
--   on_preempted(m)  a stage process was lost.         failover | restart | reconfigure
--       m.stage, m.pipeline: the lost stage; m.coverable: 1 if its shadow can take it over
--       (0: two consecutive stages are gone: no failover); m.degraded: stages running in
--       another stage's process already; m.offered: capacity waiting to launch;
--       m.reconfigurable: 1 if another pipeline is whole, so that the stages can be laid
--       out afresh from it (reconfigure; m.pipelines, m.pipelines_possible)
--   on_joined(m)     capacity came (a spot node joined) while a stage runs in another
--                    stage's process, or enough for a larger layout.
--                                                       replace | wait | grow
--       m.offered, m.degraded; m.reconfigurable: 1 where the nodes up and standing by
--       fill more (grow: m.pipelines, m.pipelines_possible; in a real run also m.stages,
--       m.stages_possible, where the pipelines were shrunk to fewer stages)
--   on_degraded(m)   every step while a stage runs in another stage's process.
--                                                       continue | restart | reconfigure
--       m.degraded, m.steps_degraded, m.seconds_degraded, m.offered, m.stages_active;
--       m.reconfigurable: 1 where a layout without the stages on shadows fits
--
-- A decision is offered only where it can be carried out (reconfigure, grow: where
-- m.reconfigurable is 1). "reconfigure" and "grow" lay the nodes up out afresh at once,
-- from the state of a whole pipeline (docs/redundancy.md#reconfigurations-that-change-the-layout):
-- the experiment's depth P (fewer stages where fewer nodes are up), as many pipelines as
-- the nodes fill up to its D, the rest standing by; no step is lost. `bivouac simulate`
-- (docs/simulation.md) raises the same events, and takes the layout from on_layout.
--
-- "restart" restarts the run in its process from its last checkpoint (the stages
-- launched again; past pipeline.restarts the run ends for bivouac run --resume DIR);
-- decisions and their times go to metrics.jsonl ({"step": 20, "event": "preempted", "decision": "failover", ...}).
--
-- Bamboo fails over every preemption RC covers and reconfigures at once when consecutive
-- stages are lost (from another pipeline's replicas of their layers; a restart where no
-- pipeline is whole). Nodes that join restore full pipelines first (a stage on a shadow
-- gets a node of its own again: replace), and grow the layout where they fill another
-- pipeline; the rest wait as standby for the next loss. A pipeline close to a fatal
-- failure is reconfigured rather than left to fail: more than `reconfigure_at` of the
-- active stages on shadows or without a replica, or more than `max_degraded` stages on
-- shadows (where no layout fits: a restart from the last checkpoint).
--
-- params (policy.params in the run's YAML):
--   max_degraded   stages on shadows tolerated                        (default: no limit)
--   reconfigure_at the fraction of the active stages on shadows or without one (2 per
--                  stage on a shadow) above which the pipelines are laid out afresh
--                  (default 0.05, Bamboo's simulator)

local max_degraded = params.max_degraded or math.huge
local reconfigure_at = params.reconfigure_at or 0.05

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

function on_joined(m)
  if m.degraded > 0 then
    return {reconfigure = "replace", reason = "full pipelines first"}
  end
  if m.reconfigurable == 1 and m.pipelines_possible > m.pipelines then
    return {reconfigure = "grow", reason = "standby nodes fill another pipeline"}
  end
  if m.reconfigurable == 1 and m.stages_possible ~= nil and m.stages_possible > m.stages then
    return {reconfigure = "grow", reason = "standby nodes deepen the pipelines again"}
  end
  return {reconfigure = "wait"}
end

function on_degraded(m)
  local close = 2 * m.degraded / m.stages_active > reconfigure_at
  if m.degraded > max_degraded then
    close = true
  end
  if close and m.reconfigurable == 1 then
    return {reconfigure = "reconfigure",
            reason = string.format("%d of %d active stages without a replica", 2 * m.degraded,
                                   m.stages_active)}
  end
  if m.degraded > max_degraded then
    return {reconfigure = "restart",
            reason = string.format("stages on shadows: %d, more than max_degraded", m.degraded)}
  end
end
