-- Runs string.find, match, gmatch and gsub of Lua's string library (REF) and of the
-- policy sandbox's metered matcher (MINE) on the same cases and returns the number of
-- cases and a description of every difference (results and error messages alike).
-- Run by tests/unit/test_policy.c in a plain Lua state.
local subjects = {
  "", "a", "aaa", "caaab", "hello world", "  key = value  ", "a.b.c", "THE (quick) fox",
  "x = 1; y = 22; z = 333", "[[nested [brackets]]]", "f(a(b)c)d", "\0a\0b", "one two  three",
  "ab%cd", "^start$", "tab\there", "Ünïcödé", string.rep("ab", 40), "a-b-c", "()", "aXbXc",
}
local patterns = {
  "", "a", "a*", "a+", "a-", "a?", ".", ".-", ".*", "^a", "a$", "^$", "$", "^", "%a+", "%A+",
  "%d+", "%s*", "%S+", "%w+", "%W", "%p", "%u%l*", "%x+", "%g+", "%c", "%z", "[%z]", "%Z+",
  "[a-c]+", "[^%s]+", "[%a_][%w_]*", "(%w+)=(%w+)", "(%w+)%s*=%s*(%w+)", "()a()", "()",
  "(a*(.)%w(%s*))", "%b()", "%b[]", "%bab", "%f[%w]%w+", "%f[%W]", "%f[%a]", "(.)%1",
  "((.)%2)", "[]]", "[^]]+", "[%]]", "[a-]", "[-a]", "[a%-c]", "%.", "%%", "a.-b",
  "^(%s*)(.-)(%s*)$", "x*$", "(h)(e)(l)(l)(o)", "[", "[a", "[^", "%", "(", ")", "%1",
  "(()", "%b", "%ba", "%f", "%fx", "(.)%2", "%0", "a**", "[%", "[]", "[^]", "^^", "$$",
  "a$b", "^%^", "%$$", "[%w%-]+", "X", "(X)", "%bXc", "[^a-z]", "[0-9]+", "%a-%d",
  "((((((((((a))))))))))", "(()())", "(a)(b)", "b*", "b-", "(b*)", "[b-a]", "%f[^%z]",
  "(%w+)", "()%w+()", ".-$", "^.-", "(.-)%s",
}
local inits = {1, 2, -1, -3, 0, 4, 100, -100}

local function pack(ok, ...)
  return {ok = ok, n = select("#", ...), ...}
end

local function show(r)
  local parts = {}
  for i = 1, r.n do
    local v = r[i]
    parts[i] = type(v) == "string" and string.format("%q", v)
        or math.type(v) == "integer" and tostring(v) .. "i" or tostring(v)
  end
  return (r.ok and "ok: " or "error: ") .. table.concat(parts, ", ")
end

local function same(a, b)
  if a.ok ~= b.ok or a.n ~= b.n then return false end
  for i = 1, a.n do
    if a[i] ~= b[i] or math.type(a[i]) ~= math.type(b[i]) then return false end
  end
  return true
end

local function collect(lib, s, p, init)
  local out = {}
  for a, b, c in lib.gmatch(s, p, init) do
    out[#out + 1] = tostring(a) .. "|" .. tostring(b) .. "|" .. tostring(c)
  end
  return table.concat(out, ";")
end

local replacements = {
  "<%0>", "%1", "[%2]", "%%", "%", "%x", "x",
  function(...) return select("#", ...) .. ":" .. tostring((...)) end,
  function() return false end,
  function() return {} end,
  {a = "A", hello = 1, world = false, [1] = "one"},
}

local count, diffs = 0, {}
local function check(what, f)
  count = count + 1
  local a, b = pack(pcall(f, REF)), pack(pcall(f, MINE))
  if not same(a, b) then
    diffs[#diffs + 1] = what .. "\n    Lua:     " .. show(a) .. "\n    sandbox: " .. show(b)
  end
end

for _, s in ipairs(subjects) do
  for _, p in ipairs(patterns) do
    local q = string.format("(%q, %q", s, p)
    check("find" .. q .. ")", function(lib) return lib.find(s, p) end)
    check("find" .. q .. ", 1, true)", function(lib) return lib.find(s, p, 1, true) end)
    check("match" .. q .. ")", function(lib) return lib.match(s, p) end)
    check("gmatch" .. q .. ")", function(lib) return collect(lib, s, p) end)
    for _, init in ipairs(inits) do
      check("find" .. q .. ", " .. init .. ")", function(lib) return lib.find(s, p, init) end)
      check("match" .. q .. ", " .. init .. ")", function(lib) return lib.match(s, p, init) end)
      check("gmatch" .. q .. ", " .. init .. ")", function(lib) return collect(lib, s, p, init) end)
    end
    for i, r in ipairs(replacements) do
      check("gsub" .. q .. ", replacement " .. i .. ")", function(lib) return lib.gsub(s, p, r) end)
      check("gsub" .. q .. ", replacement " .. i .. ", 2)",
            function(lib) return lib.gsub(s, p, r, 2) end)
    end
  end
end
return count, table.concat(diffs, "\n")
