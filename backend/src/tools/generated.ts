// Every generated file of the repository and what it is generated from.
import { launchRecordHeader } from '../qcuda/providers/launch-record';
import { callsHeader, protoHeader } from '../qcuda/wire/gen-c';
import { protocolDoc } from './protocol-doc';

export const GENERATED_FILES: Record<string, () => string> = {
  'guest-driver/include/qcuda_proto.h': protoHeader,
  'guest-driver/lib/qc_calls.h': callsHeader,
  'addon/src/launch_record.h': launchRecordHeader,
  'docs/protocol.md': protocolDoc,
};
