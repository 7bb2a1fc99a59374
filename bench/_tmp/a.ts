import { Code, ConnectError } from "@connectrpc/connect";
export const x = [Code.Internal, new ConnectError("x", Code.Internal).message];
