package inventory

import (
	"fmt"

	zmq "github.com/pebbe/zmq4"
)

// maxFrames is the most frames of one message a feed keeps: a vLLM KV event
// message has three (topic, seq, payload), a replay reply three or four.
const maxFrames = 4

// recvMessage receives one whole message from s (flags apply to its first
// frame; once it is there libzmq holds the rest), keeping at most maxFrames
// frames. LLB_KV_MAX_MSG_BYTES bounds a frame, not a message, so a publisher
// may send any number of frames: pebbe/zmq4's RecvMessageBytes would copy
// them all into the Go heap at once. Here the frames kept are dropped as
// soon as the message has more than maxFrames (it is refused anyway), each
// later frame is garbage as soon as it is read, and the message comes back
// as an error naming its frame count. libzmq frees each frame as it is
// read, so a message of many frames costs little more than its size once.
func recvMessage(s *zmq.Socket, flags zmq.Flag) ([][]byte, error) {
	var parts [][]byte
	frames := 0
	for {
		b, err := s.RecvBytes(flags)
		if err != nil {
			if frames == 0 {
				return nil, err
			}
			return nil, fmt.Errorf("kv event message cut after %d frames: %w", frames, err)
		}
		frames++
		switch {
		case frames <= maxFrames:
			parts = append(parts, b)
		case parts != nil:
			parts = nil // refused: free the kept frames now
		}
		more, err := s.GetRcvmore()
		if err != nil {
			return nil, fmt.Errorf("kv event message: %w", err)
		}
		if !more {
			break
		}
		flags = 0 // the rest of a message is already here
	}
	if frames > maxFrames {
		return nil, fmt.Errorf("kv event message of %d frames (at most %d): %w", frames, maxFrames, ErrMalformed)
	}
	return parts, nil
}
