-- Times of Go's records, included by the scripts that name this file in their '-- include:' line
-- (layers/plumbing/scripts.py); not a script of its own.

-- Unix ms of an RFC 3339 JSON string (Go's times), or nil.
local function rfc3339_ms(raw)
  local y, mo, d, h, mi, s, frac, zone = string.match(raw or '',
    '^"(%d%d%d%d)%-(%d%d)%-(%d%d)T(%d%d):(%d%d):(%d%d)(%.?%d*)(.-)"$')
  if not y then
    return nil
  end
  local offset = 0
  if zone ~= 'Z' then
    local sign, oh, om = string.match(zone, '^([+-])(%d%d):(%d%d)$')
    if not sign then
      return nil
    end
    offset = (tonumber(oh) * 3600 + tonumber(om) * 60) * (sign == '-' and -1 or 1)
  end
  y, mo, d = tonumber(y), tonumber(mo), tonumber(d)
  if mo <= 2 then
    y = y - 1
  end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = mo > 2 and mo - 3 or mo + 9
  local doy = math.floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  local days = era * 146097 + doe - 719468
  local seconds = days * 86400 + tonumber(h) * 3600 + tonumber(mi) * 60 + tonumber(s) - offset
  local ms = 0
  if #frac > 1 then
    ms = math.floor(tonumber('0' .. frac) * 1000)
  end
  return seconds * 1000 + ms
end
