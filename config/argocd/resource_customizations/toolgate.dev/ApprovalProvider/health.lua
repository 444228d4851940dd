-- Toolgate's ApprovalProvider: Ready says whether an authenticated read at the provider succeeded,
-- Reconciling that the manager retries a provider it could not read, Stalled that its settings
-- need a change (a missing Secret, a refused credential).
-- The conditions count for the object's generation only, as kstatus counts them.
local hs = {status = "Progressing", message = "Waiting for Toolgate to check the provider."}
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
