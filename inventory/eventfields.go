package inventory

// fieldID identifies an event field independent of layout.
type fieldID uint8

// Event fields in legacy-array declaration order (BlockStored).
const (
	fieldUnknown fieldID = iota
	fieldBlockHashes
	fieldParent
	fieldTokenIDs
	fieldBlockSize
	fieldLoRAID
	fieldMedium
	fieldLoRAName
	fieldExtraKeys
	fieldGroupIdx
	fieldSpecKind
	fieldSlidingWindow
	// fieldMetadata is SGLang's BlockStored metadata (map layout key; in
	// the array layout it takes lora_name's place, told apart by type).
	fieldMetadata
)

// fieldName is the map key of a field, for error messages.
func (f fieldID) String() string {
	switch f {
	case fieldBlockHashes:
		return "block_hashes"
	case fieldParent:
		return "parent_block_hash"
	case fieldTokenIDs:
		return "token_ids"
	case fieldBlockSize:
		return "block_size"
	case fieldLoRAID:
		return "lora_id"
	case fieldMedium:
		return "medium"
	case fieldLoRAName:
		return "lora_name"
	case fieldExtraKeys:
		return "extra_keys"
	case fieldGroupIdx:
		return "group_idx"
	case fieldSpecKind:
		return "kv_cache_spec_kind"
	case fieldSlidingWindow:
		return "kv_cache_spec_sliding_window"
	case fieldMetadata:
		return "metadata"
	}
	return "unknown"
}

// mapField maps a map-layout key to its field.
func mapField(key []byte) fieldID {
	switch string(key) {
	case "block_hashes":
		return fieldBlockHashes
	case "parent_block_hash":
		return fieldParent
	case "token_ids":
		return fieldTokenIDs
	case "block_size":
		return fieldBlockSize
	case "lora_id":
		return fieldLoRAID
	case "medium":
		return fieldMedium
	case "lora_name":
		return fieldLoRAName
	case "extra_keys":
		return fieldExtraKeys
	case "group_idx":
		return fieldGroupIdx
	case "kv_cache_spec_kind":
		return fieldSpecKind
	case "kv_cache_spec_sliding_window":
		return fieldSlidingWindow
	case "metadata":
		return fieldMetadata
	}
	return fieldUnknown
}

// legacyField is the field at position pos (1-based, after the tag) of a
// legacy array event; fieldUnknown past the known fields (ignored).
func legacyField(kind EventKind, pos int) fieldID {
	switch kind {
	case EventBlockStored:
		if pos >= 1 && pos <= int(fieldSlidingWindow) {
			return fieldID(pos)
		}
	case EventBlockRemoved:
		switch pos {
		case 1:
			return fieldBlockHashes
		case 2:
			return fieldMedium
		case 3:
			return fieldGroupIdx
		}
	}
	return fieldUnknown
}

// kindOf maps a wire tag to its kind (0 for unknown tags).
func kindOf(tag []byte) EventKind {
	switch string(tag) {
	case "BlockStored":
		return EventBlockStored
	case "BlockRemoved":
		return EventBlockRemoved
	case "AllBlocksCleared":
		return EventAllBlocksCleared
	}
	return 0
}
