export { shimCodec } from "../../proto/shim_wire.ts";
