export function render({ model, el }) { el.textContent = 'lens: todo'; return () => {}; }
