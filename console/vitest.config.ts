import { defineConfig } from "vitest/config";

// Unit and component tests: jsdom, no broker, no browser.
export default defineConfig({
  test: {
    environment: "jsdom",
    include: ["test/unit/**/*.test.{ts,tsx}"],
    restoreMocks: true,
    testTimeout: 30_000,
    setupFiles: ["test/unit/setup.ts"],
  },
});
