-- Toolgate's Tool: Ready says whether its calls can be accepted (its approval rules and
-- argumentsSchema compiled), Stalled whether they do not compile.
-- The conditions count for the object's generation only, as kstatus counts them.
local hs = {status = "Progressing", message = "Waiting for Toolgate to check the Tool."}
if obj.status == nil or obj.status.conditions == nil or obj.status.observedGeneration ~= obj.metadata.generation then
  return hs
end
local cond = {}
for _, c in ipairs(obj.status.conditions) do
  if c.observedGeneration == obj.metadata.generation then
    cond[c.type] = c
  end
end
if cond.Ready == nil then
  return hs
end
hs.message = cond.Ready.reason .. ": " .. (cond.Ready.message or "")
if cond.Stalled ~= nil and cond.Stalled.status == "True" then
  hs.status = "Degraded"
elseif cond.Ready.status == "True" then
  hs.status = "Healthy"
end
return hs
