// The dashboards' one script: follows the page's server-sent events (the body's data-live) and
// puts what they carry in place. Every fragment is HTML the server rendered and escaped.
"use strict";
(function () {
  const address = document.body.dataset.live;
  if (!address) {
    return;
  }
  const state = document.getElementById("live-state");
  const fragment = (html) => {
    const template = document.createElement("template");
    template.innerHTML = html;
    return template.content.firstElementChild;
  };
  const byKey = (attribute, value) =>
    document.querySelector("[" + attribute + "=\"" + CSS.escape(value) + "\"]");
  const source = new EventSource(address);
  source.onopen = () => {
    state.textContent = "live";
    state.classList.add("on");
  };
  source.onerror = () => {
    // Refused (the session ended, say): the browser gives up on the stream, and the page
    // reloaded says why. Otherwise the browser reconnects by itself, as after a session's
    // stream was cut to keep it from going idle.
    if (source.readyState === EventSource.CLOSED) {
      window.location.reload();
      return;
    }
    state.textContent = "reconnecting…";
    state.classList.remove("on");
  };
  // "N of TOTAL objects": the rows the page shows of the objects the watch holds.
  const count = (total) => {
    const line = document.getElementById("count");
    if (line) {
      const shown = document.querySelectorAll("tbody[data-kind] > tr[data-key]").length;
      line.textContent = shown + " of " + total + " objects";
    }
  };
  // A row of a table: replaced where it is, else added to its kind's table.
  source.addEventListener("upsert", (event) => {
    const message = JSON.parse(event.data);
    const row = fragment(message.html);
    const old = byKey("data-key", message.key);
    if (old) {
      old.replaceWith(row);
      count(message.total);
      return;
    }
    const body = byKey("data-kind", message.kind);
    if (!body) {
      window.location.reload();
      return;
    }
    body.appendChild(row);
    const section = body.closest("section");
    if (section) {
      section.hidden = false;
    }
    count(message.total);
  });
  // A row gone (deleted, or no longer passing the page's filter); a table left empty is hidden.
  source.addEventListener("remove", (event) => {
    const message = JSON.parse(event.data);
    const old = byKey("data-key", message.key);
    if (old) {
      const body = old.parentElement;
      old.remove();
      const section = body ? body.closest("section") : null;
      if (section && body.children.length === 0) {
        section.hidden = true;
      }
    }
    count(message.total);
  });
  // A part of the page rendered anew (the cluster's state, a fleet's tiles).
  source.addEventListener("part", (event) => {
    const message = JSON.parse(event.data);
    const old = document.getElementById(message.id);
    if (old) {
      old.replaceWith(fragment(message.html));
    }
  });
  source.addEventListener("reload", () => window.location.reload());
})();
