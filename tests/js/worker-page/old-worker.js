// A worker of an older release: it answers in unversioned messages.
addEventListener("message", (event) => event.ports[0]?.postMessage({ view: {}, diagnostics: {} }));
