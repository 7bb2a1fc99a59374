import { Code, ConnectError, createHandlerContext } from "@connectrpc/connect";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
export const x = [
  Code.Internal,
  new ConnectError("x", Code.Internal).message,
  createHandlerContext,
  create,
  fromBinary,
  toBinary,
];
