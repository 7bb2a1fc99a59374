import { Code, ConnectError } from "@connectrpc/connect";
export const e = new ConnectError("x", Code.Internal);
export const load = () => import("./y.ts");
