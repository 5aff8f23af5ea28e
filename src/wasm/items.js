// Builds transcript items from one UTF-8 buffer holding their strings back
// to back and a layout: per item a kind code, then the UTF-16 end offset of
// each string field (NONE for null). One decode for a whole batch instead
// of a JSON text parsed again or a crossing per string. Properties are in
// the order of the items' JSON, so both forms stringify the same.
const decoder = new TextDecoder();
const NONE = 0xffffffff;

export function buildItems(bytes, layout) {
  const text = decoder.decode(bytes);
  const items = [];
  let at = 0;
  let i = 0;
  const next = () => {
    const end = layout[i++];
    if (end === NONE) return null;
    const s = text.slice(at, end);
    at = end;
    return s;
  };
  while (i < layout.length) {
    switch (layout[i++]) {
      case 0:
        items.push({ kind: "message", message_id: next(), turn_id: next(), role: next(), text: next() });
        break;
      case 1:
        items.push({ kind: "tool", call_id: next(), turn_id: next(), name: next(), status: next(), output: next() });
        break;
      default: {
        const item = { kind: "turn_end", turn_id: next(), outcome: next() };
        const reason = next();
        if (reason !== null) item.reason = reason;
        items.push(item);
      }
    }
  }
  return items;
}
