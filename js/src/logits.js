export function render({ model, el }) { el.textContent = 'logits: todo'; return () => {}; }
