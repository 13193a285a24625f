// The compact accessibility snapshot of a page (run by browser_host.py inside the sandbox).
// Argument: {attr: the per-browser ref attribute, secret: the attribute marking fields filled
// with a credential, limit: the most lines, index: also answer every ref's role and name}.
// Returns {lines: [...], truncated: bool, index: {ref: [role, name]} | undefined}.
// Every element worth acting on gets a ref kept in `attr` (stable while the element lives), so
// the next action can name it. Values of password fields and of fields marked secret are never
// read into the snapshot.
//
// One line per element, as few marks as possible (the snapshot is what the model reads on every
// action): `e4 textbox New reading = 985` is a ref, a role, a name and, after " = ", a value
// (none: the field is empty); `h1 Your meters` a heading of level 1; a table row is its cells
// joined by " | "; any other line is the page's text, long texts shortened (extract reads them
// in full).
(args) => {
  const ATTR = args.attr;
  const SECRET = args.secret;
  const LIMIT = args.limit;
  const INDEX = args.index ? {} : null;
  //: the most characters of one text line; the rest is "…" (extract gives all of it)
  const TEXT_CHARS = 100;
  let counter = Number(document.documentElement.getAttribute(ATTR + "-n") || "0");
  const lines = [];
  let truncated = false;
  const ROLE_BY_TAG = {
    A: "link", BUTTON: "button", SELECT: "combobox", TEXTAREA: "textbox", H1: "heading",
    H2: "heading", H3: "heading", H4: "heading", H5: "heading", H6: "heading", TABLE: "table",
    TR: "row", TH: "columnheader", TD: "cell", UL: "list", OL: "list", LI: "listitem",
    FORM: "form", NAV: "navigation", MAIN: "main", IMG: "img", LABEL: "label", P: "paragraph",
    DIALOG: "dialog", OPTION: "option",
  };
  const INPUT_ROLE = {
    checkbox: "checkbox", radio: "radio", submit: "button", button: "button", reset: "button",
    range: "slider", number: "spinbutton", search: "searchbox", image: "button",
  };
  const ACTIONABLE = new Set(["link", "button", "textbox", "searchbox", "combobox", "checkbox",
    "radio", "slider", "spinbutton", "option", "menuitem", "tab", "switch"]);
  const SKIP = new Set(["SCRIPT", "STYLE", "NOSCRIPT", "TEMPLATE", "HEAD", "META", "LINK", "SVG"]);
  const clip = (text, n) => {
    const t = (text || "").replace(/\s+/g, " ").trim();
    return t.length > n ? t.slice(0, n - 1) + "…" : t;
  };
  const hidden = (el) => {
    if (el.hidden || el.getAttribute("aria-hidden") === "true") return true;
    const style = getComputedStyle(el);
    if (style.display === "none" || style.visibility === "hidden") return true;
    if (style.opacity === "0") return true;
    const rect = el.getBoundingClientRect();
    // off-screen or collapsed to nothing: text a person would never see
    if (rect.width <= 1 && rect.height <= 1 && style.overflow === "hidden") return true;
    if (rect.right < -1000 || rect.bottom < -1000) return true;
    return false;
  };
  const roleOf = (el) => {
    const explicit = el.getAttribute("role");
    if (explicit) return explicit.split(" ")[0];
    if (el.tagName === "INPUT") return INPUT_ROLE[(el.type || "text").toLowerCase()] || "textbox";
    if (el.tagName === "A" && !el.hasAttribute("href")) return "";
    return ROLE_BY_TAG[el.tagName] || "";
  };
  const nameOf = (el, role) => {
    const labelled = el.getAttribute("aria-labelledby");
    if (labelled) {
      const parts = labelled.split(/\s+/).map((id) => document.getElementById(id))
        .filter(Boolean).map((n) => n.innerText || n.textContent);
      if (parts.length) return clip(parts.join(" "), 80);
    }
    const aria = el.getAttribute("aria-label");
    if (aria) return clip(aria, 80);
    if (el.labels && el.labels.length) return clip(el.labels[0].innerText, 80);
    if (el.tagName === "INPUT" && ["submit", "button", "reset"].includes(el.type)) {
      return clip(el.value || el.type, 80);
    }
    if (el.tagName === "IMG") return clip(el.alt, 80);
    if (["textbox", "searchbox", "combobox", "spinbutton"].includes(role)) {
      return clip(el.getAttribute("placeholder") || el.getAttribute("name") || el.title, 80);
    }
    if (["link", "button", "heading", "option", "tab", "menuitem", "columnheader", "cell",
      "listitem", "label"].includes(role)) {
      return clip(el.innerText || el.textContent || el.title, 80);
    }
    return clip(el.title, 80);
  };
  const valueOf = (el, role) => {
    if (el.tagName === "SELECT") {
      const chosen = el.selectedOptions && el.selectedOptions[0];
      return chosen ? clip(chosen.text, 60) : "";
    }
    if (!["INPUT", "TEXTAREA"].includes(el.tagName)) return null;
    if (["checkbox", "radio"].includes(role)) return el.checked ? "checked" : "unchecked";
    if (["submit", "button", "reset", "image"].includes((el.type || "").toLowerCase())) return null;
    if ((el.type || "").toLowerCase() === "password" || el.hasAttribute(SECRET)) {
      return el.value ? "••••••" : "";
    }
    return clip(el.value, 60);
  };
  const refOf = (el) => {
    let ref = el.getAttribute(ATTR);
    if (!ref) {
      counter += 1;
      ref = "e" + counter;
      el.setAttribute(ATTR, ref);
    }
    return ref;
  };
  const push = (depth, text) => {
    if (lines.length >= LIMIT) {
      truncated = true;
      return false;
    }
    lines.push("  ".repeat(Math.min(depth, 8)) + text);
    return true;
  };
  // roles that only group others: not printed (their content is, one level up)
  const STRUCTURAL = new Set(["paragraph", "label", "navigation", "list", "listitem", "form",
    "main", "group", "region", "banner", "contentinfo", "complementary", "article", "section",
    "generic", "presentation", "none"]);
  const rowLine = (el) => {
    // a table row on one line: its cells' texts, separated by |
    const cells = Array.from(el.children).filter((c) => !hidden(c));
    return cells.map((c) => clip(c.innerText, 60)).join(" | ");
  };
  const walk = (node, depth) => {
    if (truncated) return;
    if (node.nodeType === Node.TEXT_NODE) {
      const text = clip(node.textContent, TEXT_CHARS);
      // a label's text is the name of its control, printed there
      const parent = node.parentElement;
      if (parent && parent.tagName === "LABEL" && parent.control) return;
      if (text) push(depth, text);
      return;
    }
    if (node.nodeType !== Node.ELEMENT_NODE) return;
    const el = node;
    if (SKIP.has(el.tagName.toUpperCase()) || hidden(el)) return;
    const role = roleOf(el);
    const named = role && !STRUCTURAL.has(role);
    if (role === "row") {
      const interactive = el.querySelector("a[href],button,input,select,textarea,[role=button]");
      if (!interactive) {
        push(depth, rowLine(el));
        return;
      }
    }
    if (named) {
      const name = nameOf(el, role);
      let line;
      if (role === "heading") {
        line = "h" + (Number(el.tagName.slice(1)) || el.getAttribute("aria-level") || 2) + " " + name;
      } else {
        line = name ? role + " " + name : role;
        if (ACTIONABLE.has(role) || role === "table") {
          const ref = refOf(el);
          line = ref + " " + line;
          if (INDEX) INDEX[ref] = [role, name];
        }
      }
      const value = valueOf(el, role);
      if (value) line += " = " + value;
      if (el.disabled) line += " (disabled)";
      if (!push(depth, line.trim())) return;
      // a leaf control's text is its name: do not repeat it
      if (["link", "button", "textbox", "searchbox", "option", "heading", "columnheader",
        "cell", "img", "checkbox", "radio", "spinbutton", "slider"].includes(role)) return;
      if (el.tagName === "SELECT") {
        const options = Array.from(el.options).map((opt) => clip(opt.text, 40));
        push(depth + 1, "options: " + options.join(" | "));
        return;
      }
    }
    for (const child of el.childNodes) walk(child, named ? depth + 1 : depth);
  };
  if (document.body) walk(document.body, 0);
  document.documentElement.setAttribute(ATTR + "-n", String(counter));
  return INDEX ? { lines, truncated, index: INDEX } : { lines, truncated };
}
