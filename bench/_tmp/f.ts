export { statusFromError } from "../../sdk/ttrpc/status.ts";
