/**
 * What `ui` (src/ui.ts) reports, read through consola's own hook: the shared instance's
 * reporters are swapped for one that keeps every log object and renders it as the plain
 * reporter would (the bytes a pipe or a log file gets). `restore()` puts back the reporters
 * and the level.
 */
import type { LogObject } from "consola/core";
import { plainReporter } from "../../src/reporters/plain.ts";
import { ui } from "../../src/ui.ts";

export interface CapturedUi {
  /** Every log object consola passed to its reporters, in order. */
  logs: LogObject[];
  /** Those objects as plain lines (journal-prefixed if asked). */
  readonly text: string;
  restore(): void;
}

export function captureUi(options: { journal?: boolean } = {}): CapturedUi {
  const saved = { reporters: [...ui.options.reporters], level: ui.level };
  const logs: LogObject[] = [];
  let text = "";
  const plain = plainReporter((t) => void (text += t), options);
  ui.setReporters([
    {
      log(logObj, ctx) {
        logs.push(logObj);
        plain.log(logObj, ctx);
      },
    },
  ]);
  return {
    logs,
    get text() {
      return text;
    },
    restore() {
      ui.setReporters(saved.reporters);
      ui.level = saved.level;
    },
  };
}
