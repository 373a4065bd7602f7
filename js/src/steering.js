export function render({ model, el }) { el.textContent = 'steering: todo'; return () => {}; }
