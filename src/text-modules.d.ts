// Bun imports any file as a string with `with { type: "text" }`; `bun build --compile` embeds it.
declare module "*.service" {
  const text: string;
  export default text;
}
declare module "*.container" {
  const text: string;
  export default text;
}
