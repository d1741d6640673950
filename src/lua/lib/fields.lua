-- lib/fields.lua: reading a task's fields (name, value pairs) as the scripts get them: from
-- ARGV, an entry's XRANGE reply, a delayed member or a flow's body.
-- Input: fields[first], fields[first + 1], ... up to fields[last] (last: nil = the end).
-- Output: field_value(fields, first, last, name): the value of field `name`, or nil;
--   field_pair(fields, first, last, a, b): the values of fields `a` and `b` (each nil when
--   absent), in one pass.

local function field_value(fields, first, last, name)
  for i = first, (last or #fields) - 1, 2 do
    if fields[i] == name then return fields[i + 1] end
  end
  return nil
end

local function field_pair(fields, first, last, a, b)
  local va, vb = nil, nil
  for i = first, (last or #fields) - 1, 2 do
    if fields[i] == a then
      va = fields[i + 1]
    elseif fields[i] == b then
      vb = fields[i + 1]
    end
  end
  return va, vb
end
