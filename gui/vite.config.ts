import { defineConfig } from "vitest/config";

// The built app is served by deepcontext's local server under /<token>/, so every asset path is
// relative (base "./"), and it lands inside the Python package, which ships it.
export default defineConfig({
  base: "./",
  build: {
    outDir: "../python/deepcontext/gui_static",
    emptyOutDir: true,
    target: "es2022",
    chunkSizeWarningLimit: 1500,
  },
  test: {
    include: ["test/**/*.test.ts"],
    environment: "node",
  },
});
