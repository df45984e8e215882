-- policy_exports.lua: calls the shipped plugin exports for policy_exports.sh. params.case
-- picks the call, params.at the step (or epoch) of the call.
local cpu = plugins.compute.cpu
local case = params.case
local at = math.tointeger(params.at or 5)

if case == "setup_effectful" then
  cpu.set_threads(1)
end
local setup_threads = cpu.threads()

local function call(m)
  if case == "threads" then
    cpu.set_threads(1)
    return {stop = true, reason = "threads " .. setup_threads .. " -> " .. cpu.threads()}
  elseif case == "kernel_seconds" then
    cpu.kernel_seconds("all")
  elseif case == "checkpoint" then
    plugins.resilience.checkpoint.write_now()
  elseif case == "arity" then
    cpu.set_threads()
  elseif case == "arity2" then
    cpu.set_threads(1, 2)
  elseif case == "string" then
    cpu.set_threads("4")
  elseif case == "float" then
    cpu.set_threads(1.5)
  elseif case == "range" then
    cpu.set_threads(2^63)
  elseif case == "nil" then
    cpu.kernel_seconds(nil)
  elseif case == "nul" then
    cpu.kernel_seconds("gemm\0x")
  elseif case == "table" then
    cpu.kernel_seconds({})
  elseif case == "unknown_kind" then
    cpu.kernel_seconds("fft")
  elseif case == "too_many" then
    cpu.set_threads(1000)
  elseif case == "pcall" then
    local ok, msg = pcall(cpu.set_threads, "x")
    return {stop = true, reason = tostring(ok) .. ": " .. msg}
  elseif case == "write" then
    plugins.compute.cpu = nil
  end
end

function on_step_end(m)
  if case == "kernel_seconds" and m.step == at + 1 then
    local s = cpu.kernel_seconds("all")
    return {stop = true, reason = "counted " .. tostring(s > 0 and s >= cpu.kernel_seconds("gemm"))}
  end
  if m.step == at then return call(m) end
end

function on_epoch_end(m)
  if case == "live" then -- threads.sh: pools replaced while the roles run kernels
    cpu.set_threads(1 + m.epoch % 2)
    cpu.kernel_seconds("all")
    return
  end
  if m.epoch == at then return call(m) end
end
