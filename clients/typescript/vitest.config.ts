import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/support/global-setup.ts"],
    testTimeout: 30_000,
    hookTimeout: 90_000,
    // Two cores shared by many: one test file at a time keeps timing rows honest.
    fileParallelism: false,
  },
});
