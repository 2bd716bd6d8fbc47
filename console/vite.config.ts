import { defineConfig } from "vite";

// The console is served by the broker's HTTP side port (QUEEN_HTTP_PORT), from `/`,
// next to gRPC-Web on the same origin. `base: "./"` keeps every asset path relative,
// so dist/ works from any mount point. The dev server forwards the gRPC-Web paths
// (/queen.v1.*) to a running side port (QUEEN_HTTP_URL, default http://127.0.0.1:6680).
export default defineConfig({
  base: "./",
  build: {
    outDir: "dist",
    emptyOutDir: true,
    sourcemap: false,
    // One stable file per kind keeps dist/ easy to embed and to diff.
    assetsInlineLimit: 0,
    chunkSizeWarningLimit: 600,
  },
  server: {
    proxy: {
      "^/queen\\.v1\\.": {
        target: process.env.QUEEN_HTTP_URL || "http://127.0.0.1:6680",
        changeOrigin: true,
      },
    },
  },
});
