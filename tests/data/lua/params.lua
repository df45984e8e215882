-- params is visible (in set-up too), typed and read-only.
local patience_at_setup = params.patience

function on_epoch_end(m)
  local n = 0
  for _ in pairs(params) do n = n + 1 end
  return {set = {
    patience = params.patience,
    patience_is_integer = math.type(params.patience) == "integer" and 1 or 0,
    rate = params.rate,
    flag = params.flag == true and 1 or 0,
    off = params.off == false and 1 or 0,
    name_is_string = type(params.name) == "string" and 1 or 0,
    name_length = #params.name,
    count = n,
    at_setup = patience_at_setup,
  }}
end
