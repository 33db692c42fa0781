/**
 * GET /dashboard: one self-contained HTML page (styles and script inline, no external
 * assets), embedded in the executable as text. The page holds no data; it polls
 * /dashboard/data, which is protected like /status. A Content-Security-Policy pins the
 * inline script and style by hash and allows connections to this origin only, so the
 * browser itself refuses any request to another host.
 */
import { createHash } from "node:crypto";
import page from "./page.html" with { type: "text" };

/** bun-types declares *.html as an HTML bundle; imported `with { type: "text" }` it is the file's text. */
export const DASHBOARD_HTML = page as unknown as string;

const hashOf = (tag: string) => {
  const body = new RegExp(`<${tag}>([\\s\\S]*?)</${tag}>`).exec(DASHBOARD_HTML)?.[1] ?? "";
  return `'sha256-${createHash("sha256").update(body).digest("base64")}'`;
};

const CSP = [
  "default-src 'none'",
  `script-src ${hashOf("script")}`,
  `style-src ${hashOf("style")}`,
  "connect-src 'self'",
  "img-src data:",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join("; ");

const HEADERS = {
  "content-type": "text/html; charset=utf-8",
  "content-security-policy": CSP,
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "cache-control": "no-cache",
};

export function dashboardPage(): Response {
  return new Response(DASHBOARD_HTML, { headers: HEADERS });
}
