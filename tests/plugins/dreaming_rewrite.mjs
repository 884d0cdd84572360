// memory-core's dreaming rewrite of MEMORY.md, write for write: OpenClaw 2026.9.6's commitMemoryContent
// (dist/short-term-promotion-memory-write-*.mjs) on a local workspace calls @openclaw/fs-safe's
// replaceFileAtomic with these options: a temp file "MEMORY.md.promotion.<pid>.<uuid>.tmp" beside it,
// written and fsynced, the hash of MEMORY.md checked, rename over MEMORY.md, the directory fsynced.
// The module is the installed OpenClaw's own (its path is the first argument). Prints the renames done.
// Usage: node dreaming_rewrite.mjs <fs-safe/dist/atomic.js> <workspace>/MEMORY.md <new content>
import { createHash } from "node:crypto";
import fs from "node:fs/promises";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [atomicJs, filePath, content] = process.argv.slice(2);
const { replaceFileAtomic } = await import(pathToFileURL(atomicJs).href);
const hash = (text) => createHash("sha256").update(text).digest("hex");
const read = async () => fs.readFile(filePath, "utf-8").catch((error) => (error.code === "ENOENT" ? "" : Promise.reject(error)));
const expectedHash = hash(await read());
const renames = [];
await replaceFileAtomic({
  filePath,
  content,
  dirMode: (await fs.stat(path.dirname(filePath))).mode & 4095,
  mode: 384,
  preserveExistingMode: true,
  tempPrefix: `${path.basename(filePath)}.promotion`,
  syncTempFile: true,
  syncParentDir: true,
  throwOnCleanupError: true,
  beforeRename: async () => {
    if (hash(await read()) !== expectedHash) throw new Error("MEMORY.md changed before the dreaming write could commit");
  },
  fileSystem: {
    promises: {
      mkdir: fs.mkdir,
      chmod: fs.chmod,
      writeFile: fs.writeFile,
      rename: async (from, to) => {
        renames.push([from, to]);
        await fs.rename(from, to);
      },
      copyFile: fs.copyFile,
      unlink: fs.unlink,
      rm: fs.rm,
      open: fs.open,
      stat: fs.stat,
      lstat: fs.lstat,
    },
  },
});
console.log(JSON.stringify({ renames }));
