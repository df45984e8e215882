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
-- "restart" ends the run so that it restarts from its last checkpoint (bivouac run
-- --resume DIR, which bench/preemption.sh does); decisions and their times go to
-- metrics.jsonl ({"step": 20, "event": "preempted", "decision": "failover", ...}).
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

local max_degraded = params.max_degraded or math.huge

function on_preempted(m)
  if m.coverable == 1 then
    return {reconfigure = "failover"}
  end
  return {reconfigure = "restart", reason = "two consecutive stages lost: no replica of both"}
end

function on_joined(m)
  return {reconfigure = "replace", reason = "full pipelines first"}
end

function on_degraded(m)
  if m.degraded > max_degraded then
    return {reconfigure = "restart",
            reason = string.format("stages on shadows: %d, more than max_degraded", m.degraded)}
  end
end
