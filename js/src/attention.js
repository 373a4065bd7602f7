export function render({ model, el }) { el.textContent = 'attention: todo'; return () => {}; }
