-- What a policy must not reach is absent, what it needs is there; set-up fails naming
-- the first mismatch. Then each m.mode tries one forbidden thing.
local function lookup(path)
  local value = _G
  for part in path:gmatch("[^.]+") do
    if type(value) ~= "table" then return nil end
    value = value[part]
  end
  return value
end

local absent = {"os", "io", "package", "debug", "coroutine", "require", "load", "loadfile",
                "dofile", "loadstring", "collectgarbage", "rawset", "warn", "string.dump",
                "math.random", "math.randomseed", "table.move", "setfenv", "getfenv"}
for _, name in ipairs(absent) do
  if lookup(name) ~= nil then error("sandbox leak: " .. name) end
end
local present = {"string.format", "table.insert", "table.concat", "math.floor", "utf8.char",
                 "pcall", "xpcall", "error", "assert", "pairs", "ipairs", "next", "select",
                 "tostring", "tonumber", "type", "setmetatable", "getmetatable", "rawget",
                 "rawequal", "rawlen", "log", "print", "params"}
for _, name in ipairs(present) do
  if lookup(name) == nil then error("sandbox lacks: " .. name) end
end

function on_epoch_end(m)
  if m.mode == 1 then os.exit(1) end
  if m.mode == 2 then require("os") end
  if m.mode == 3 then load("return 1") end
  if m.mode == 4 then string.dump(on_epoch_end) end
  if m.mode == 5 then debug.getinfo(1) end
  if m.mode == 6 then ("x"):dump() end
  if m.mode == 7 then io.open("/etc/passwd") end
end
