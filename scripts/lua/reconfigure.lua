-- reconfigure.lua: Bamboo's reconfiguration policy (NSDI '23, Appendix A), as bivouac's
-- pipeline engine offers it (docs/redundancy.md#reconfiguration-by-policy).
--
-- The events, raised where stages keep replicas (the `redundancy` strategy) and run as
-- processes, with what a handler may decide (`reconfigure = "..."`; the first is what
-- happens without a handler):
--
--   on_preempted(m)  a stage process was lost.         failover | restart
--       m.stage, m.pipeline: the lost stage; m.coverable: 1 if its shadow can take it over
--       (0: two consecutive stages are gone, only restart is possible); m.degraded: stages
--       running in another stage's process already; m.offered: capacity waiting to launch
--   on_joined(m)     capacity came (a spot node joined) while a stage runs in another
--                    stage's process.                   replace | wait
--       m.offered, m.degraded
--   on_degraded(m)   every step while a stage runs in another stage's process.
--                                                       continue | restart
--       m.degraded, m.steps_degraded, m.seconds_degraded, m.offered
--
-- `bivouac simulate` (docs/simulation.md) raises the same events with m.reconfigurable = 1
-- and one more decision each: on_joined may "grow" (more pipelines, when the nodes up and
-- standing by fill more: m.pipelines, m.pipelines_possible; raised then too) and
-- on_degraded may "reconfigure" (lay the nodes up out afresh, without the stages on
-- shadows: m.stages_active, m.pipelines), each a reconfiguration at the step's end, as
-- Bamboo's Appendix A reconfigures. A real run does not offer them (yet): the handlers
-- below choose them only where m.reconfigurable is 1.
--
-- "restart" restarts the run in its process from its last checkpoint (the stages
-- launched again; past pipeline.restarts the run ends for bivouac run --resume DIR);
-- decisions and their times go to metrics.jsonl ({"step": 20, "event": "preempted", "decision": "failover", ...}).
--
-- Bamboo fails over every preemption RC covers and reconfigures at once when consecutive
-- stages are lost (restart, here: nothing keeps their layers). Nodes that join restore
-- full pipelines first (a stage on a shadow gets a node of its own again: replace); the
-- rest wait as standby for the next loss. A pipeline close to a fatal failure (here: more
-- than `max_degraded` stages on shadows, where one more loss of a shadow is fatal) is
-- reconfigured rather than left to fail (restart from the last checkpoint).
--
-- params (policy.params in the run's YAML):
--   max_degraded   stages on shadows tolerated before a restart      (default: no limit)
--   reconfigure_at where reconfiguration is possible: the fraction of the active stages
--                  on shadows or without one (2 per stage on a shadow) above which the
--                  pipelines are reconfigured (default 0.05, Bamboo's simulator)

local max_degraded = params.max_degraded or math.huge
local reconfigure_at = params.reconfigure_at or 0.05

function on_preempted(m)
  if m.coverable == 1 then
    return {reconfigure = "failover"}
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
  return {reconfigure = "wait"}
end

function on_degraded(m)
  if m.reconfigurable == 1 and 2 * m.degraded / m.stages_active > reconfigure_at then
    return {reconfigure = "reconfigure",
            reason = string.format("%d of %d active stages without a replica", 2 * m.degraded,
                                   m.stages_active)}
  end
  if m.degraded > max_degraded then
    return {reconfigure = "restart",
            reason = string.format("stages on shadows: %d, more than max_degraded", m.degraded)}
  end
end
