/**
 * The few error classes llmroute throws. Each carries a stable `code` and, for the CLI
 * edge, the exit code it maps to; the HTTP edge maps them to the API's own error JSON.
 */

export type ErrorCode = "config" | "usage" | "listen" | "unreachable" | "upstream";

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

/**
 * A server that cannot bind, as one clear error (exit 2) the same from `serve` and `sim`;
 * undefined when `error` is not a bind failure. `address` says which listener and where
 * it came from; `hint` how to choose another.
 */
export function listenError(error: unknown, address: string, hint: string): LlmrouteError | undefined {
  const code = (error as { code?: unknown } | undefined)?.code;
  const why =
    code === "EADDRINUSE"
      ? "address in use (another process listens there)"
      : code === "EADDRNOTAVAIL"
        ? "address not available on this host"
        : code === "EACCES"
          ? "permission denied (ports below 1024 need privileges)"
          : undefined;
  if (why === undefined) return undefined;
  return new LlmrouteError("listen", `cannot listen on ${address}: ${why}; ${hint}`, { exitCode: 2, cause: error });
}

/** One problem found in a config file: where it is, what was there, and what is allowed. */
export interface ConfigIssue {
  file: string;
  /** 1-based line and column of the value (of the key when it is unknown or missing). */
  line?: number;
  column?: number;
  /** The command-line flag that set the value, when it did not come from the file. */
  flag?: string;
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

/**
 * `file:line:column: key = value: reason`, the shape editors and CI annotators jump to;
 * a value from a flag is named by the flag as it was typed: `--listen 8081: reason`.
 */
export function formatIssue(issue: ConfigIssue): string {
  if (issue.flag !== undefined) {
    const typed = typeof issue.value === "string" ? issue.value : JSON.stringify(issue.value);
    return `${issue.flag} ${typed}: ${issue.reason}`;
  }
  const where = [issue.file, issue.line, issue.line === undefined ? undefined : issue.column].filter((p) => p !== undefined).join(":");
  const value = issue.value === undefined ? "" : ` = ${JSON.stringify(issue.value)}`;
  return `${where}: ${issue.key}${value}: ${issue.reason}`;
}
