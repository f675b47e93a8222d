// Files a person attaches to a message: the clip button, dropping them on the page, or pasting
// (an image from the clipboard). Each waits in the tray above the box as a chip (an image
// as a thumbnail, from a blob: URL) until the message goes; the deployment's limits (how
// large a file, how many a message: GET /webchat/session) are checked here first, naming
// the limit, and again by the gateway. Chips also show the files of messages already sent.
"use strict";

const attach = (() => {
  const tray = document.getElementById("tray"), note = document.getElementById("filenote");
  const picker = document.getElementById("files");
  const RASTER = /^image\/(png|jpeg|gif|webp)$/;
  const limits = {maxFileBytes: 0, maxFiles: 0};
  let pending = [];  // {file, url} each

  function size(n) {
    if (n == null) return "";
    if (n < 1024) return n + " bytes";
    return n < 1024 * 1024 ? (n / 1024).toFixed(1) + " KB" : (n / 1024 / 1024).toFixed(1) + " MB";
  }
  function say(lines) { note.textContent = lines.join("\n"); note.hidden = !lines.length; }

  // Adds files to the tray; those past a limit are refused, each with the limit it passes.
  function add(files) {
    const refused = [];
    for (const file of files) {
      if (limits.maxFiles && pending.length >= limits.maxFiles) {
        refused.push(file.name + " was not added: at most " + limits.maxFiles + " files a message (HERMES_MAX_FILES_PER_MESSAGE)");
      } else if (limits.maxFileBytes && file.size > limits.maxFileBytes) {
        refused.push(file.name + " was not added: it is " + size(file.size) + ", over the limit of " + size(limits.maxFileBytes) + " a file (HERMES_MAX_FILE_MB)");
      } else {
        pending.push({file: file, url: RASTER.test(file.type) ? URL.createObjectURL(file) : ""});
      }
    }
    say(refused);
    render();
  }
  function render() {
    tray.replaceChildren(...pending.map((p) => {
      const c = chip({name: p.file.name, mime_type: p.file.type, size: p.file.size}, p.url);
      const x = document.createElement("button");
      x.type = "button"; x.textContent = "×"; x.setAttribute("aria-label", "Remove " + p.file.name);
      x.onclick = () => {
        if (p.url) URL.revokeObjectURL(p.url);
        pending = pending.filter((q) => q !== p); render();
      };
      c.appendChild(x);
      return c;
    }));
    tray.hidden = !pending.length;
  }

  // One file as a chip: its thumbnail when there is one, else its name and size (and why
  // it was not read, for a refused one).
  function chip(file, url) {
    const c = document.createElement("span");
    c.className = "chip" + (file.note ? " refused" : "") + (url ? " image" : "");
    c.title = file.name + (file.note ? ": " + file.note : "");
    if (url) {
      const img = document.createElement("img"); img.className = "thumb"; img.alt = file.name; img.src = url;
      c.appendChild(img);
    } else {
      const name = document.createElement("span"); name.textContent = file.name;
      const small = document.createElement("small"); small.textContent = file.note ? "not read" : size(file.size);
      c.append(name, small);
    }
    return c;
  }
  // The files of a message, as chips; ``load(file)`` gives a kept image's URL (or null).
  function chips(files, load) {
    const box = document.createElement("div"); box.className = "files";
    for (const f of files) {
      const c = chip(f, f.url || "");
      box.appendChild(c);
      if (!f.url && load && f.kind === "image" && !f.note) {
        load(f).then((url) => { if (url) c.replaceWith(chip(f, url)); }).catch(() => {});
      }
    }
    return box;
  }

  // The tray's files, for a message about to go (the tray empties).
  function take() {
    const taken = pending; pending = []; render(); say([]);
    return taken;
  }
  // Files a message could not take (the gateway refused them): back in the tray.
  function putBack(files) { pending = files.concat(pending); render(); }

  document.getElementById("attach").onclick = () => picker.click();
  picker.addEventListener("change", () => { add([...picker.files]); picker.value = ""; });
  // Dropped anywhere on the page.
  const carriesFiles = (e) => e.dataTransfer && [...e.dataTransfer.types].includes("Files");
  document.addEventListener("dragover", (e) => {
    if (!carriesFiles(e)) return;
    e.preventDefault(); e.dataTransfer.dropEffect = "copy"; document.body.classList.add("dropping");
  });
  document.addEventListener("dragleave", (e) => { if (!e.relatedTarget) document.body.classList.remove("dropping"); });
  document.addEventListener("drop", (e) => {
    document.body.classList.remove("dropping");
    if (!e.dataTransfer || !e.dataTransfer.files.length) return;
    e.preventDefault(); add([...e.dataTransfer.files]);
  });
  // Pasted into the box: the clipboard's files (a screenshot); its text pastes as usual.
  document.getElementById("text").addEventListener("paste", (e) => {
    const files = e.clipboardData ? [...e.clipboardData.files] : [];
    if (!files.length) return;
    if (!e.clipboardData.getData("text/plain")) e.preventDefault();
    add(files);
  });

  return {
    add, take, putBack, chips,
    has: () => pending.length > 0,
    setLimits: (l) => { if (l) { limits.maxFileBytes = l.max_file_bytes || 0; limits.maxFiles = l.max_files || 0; } },
    describe: (p) => ({name: p.file.name, mime_type: p.file.type, size: p.file.size, url: p.url}),
  };
})();
