-- Toolgate's MCPServer: Ready says whether the server's tools were listed and each exposed tool has
-- its Tool, Reconciling that the manager retries a server it could not list, Stalled that its
-- settings need a change (a header Secret that does not consent, a Tool name taken).
-- The conditions count for the object's generation only, as kstatus counts them.
local hs = {status = "Progressing", message = "Waiting for Toolgate to list the MCP server's tools."}
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
