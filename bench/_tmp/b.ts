import { Code, ConnectError, createHandlerContext } from "@connectrpc/connect";
export const x = [
  Code.Internal,
  new ConnectError("x", Code.Internal).message,
  createHandlerContext,
];
