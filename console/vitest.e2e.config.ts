import { defineConfig } from "vitest/config";

// The browser suite: Chromium (Debian's /usr/bin/chromium through playwright-core)
// drives the console served by a real broker. QUEEN_CONSOLE_URL and QUEEN_ADDR name
// it; globalSetup fails the run with a clear message when either is unreachable.
export default defineConfig({
  test: {
    environment: "node",
    include: ["test/e2e/**/*.e2e.ts"],
    globalSetup: ["test/e2e/global-setup.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    fileParallelism: false,
  },
});
