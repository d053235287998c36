// Compiled (not run) by `npm test`: RetainerExecutor is assignable to
// @cloudflare/codemode's Executor.
import type { Executor } from "@cloudflare/codemode";
import { RetainerExecutor } from "../src/index.js";

export const executor: Executor = new RetainerExecutor({ url: "ws://127.0.0.1:8080/executor" });
