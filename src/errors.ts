/**
 * The few error classes llmroute throws. Each carries a stable `code` and, for the CLI
 * edge, the exit code it maps to; the HTTP edge maps them to the API's own error JSON.
 */

export type ErrorCode = "config" | "usage" | "unreachable" | "upstream";

export class LlmrouteError extends Error {
  readonly code: ErrorCode;
  readonly exitCode: number;

  constructor(code: ErrorCode, message: string, options: { exitCode?: number; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "LlmrouteError";
    this.code = code;
    this.exitCode = options.exitCode ?? 2;
  }
}

/** One problem found in a config file: where it is, what was there, and what is allowed. */
export interface ConfigIssue {
  file: string;
  line?: number;
  key: string;
  value?: unknown;
  reason: string;
}

export class ConfigError extends LlmrouteError {
  readonly issues: ConfigIssue[];

  constructor(issues: ConfigIssue[], options: { cause?: unknown } = {}) {
    super("config", issues.map(formatIssue).join("\n"), { exitCode: 2, ...options });
    this.name = "ConfigError";
    this.issues = issues;
  }
}

export function formatIssue(issue: ConfigIssue): string {
  const where = issue.line === undefined ? issue.file : `${issue.file}:${issue.line}`;
  const value = issue.value === undefined ? "" : ` = ${JSON.stringify(issue.value)}`;
  return `${where}: ${issue.key}${value}: ${issue.reason}`;
}
