import { defineCommand } from "citty";
export default defineCommand({ meta: { name: "serve", description: "Run the router" }, run() { return 0; } });
