export { TtrpcServer } from "../../sdk/ttrpc/server.ts";
