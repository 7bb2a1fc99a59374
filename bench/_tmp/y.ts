import { create, toJson } from "@bufbuild/protobuf";
import { StatusSchema } from "../../proto/gen/google/rpc/status_pb.ts";
export const f = () => toJson(StatusSchema, create(StatusSchema));
