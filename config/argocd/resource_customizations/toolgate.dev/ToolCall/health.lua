-- Toolgate's ToolCall: reads the kstatus conditions Toolgate writes (Reconciling while the call is
-- under way, Stalled once it ended in anything but Succeeded, Ready once its outcome is final), as
-- Flux's kstatus does, so that Argo CD and Flux agree.
local hs = {status = "Progressing", message = "Waiting for Toolgate to accept the ToolCall."}
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
local cond = {}
for _, c in ipairs(obj.status.conditions) do
  cond[c.type] = c
end
if cond.Stalled ~= nil and cond.Stalled.status == "True" then
  hs.status = "Degraded"
elseif cond.Ready ~= nil and cond.Ready.status == "True" then
  hs.status = "Healthy"
end
local phase = obj.status.phase or ""
if phase ~= "" then
  hs.message = phase
  if obj.status.reason ~= nil and obj.status.reason ~= "" then
    hs.message = hs.message .. " (" .. obj.status.reason .. ")"
  end
  if obj.status.message ~= nil and obj.status.message ~= "" then
    hs.message = hs.message .. ": " .. obj.status.message
  end
end
return hs
