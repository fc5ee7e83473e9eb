package batch

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// A repair rewrites an output without some of its rows (see idIndex.dropRows). The
// rows kept are copied to FILE.repair (and FILE.ids.repair for .npy), synced, then
// renamed over the originals. A JSONL output is one rename, atomic. A .npy output is
// two files, so a commit marker FILE.repair-commit is created once both copies are
// complete and removed after both renames: a kill before the marker leaves the old
// pair, which the next run repairs again; a kill after it is rolled forward by
// finishRepair. Either way the array and its ids never come from different repairs.

func repairPath(p string) string { return p + ".repair" }
func commitPath(p string) string { return p + ".repair-commit" }

// finishRepair completes or discards a repair that a kill interrupted.
func finishRepair(path string, format Format) error {
	files := []string{path}
	if format == FormatNPY {
		files = append(files, IDsPath(path))
	}
	_, err := os.Stat(commitPath(path))
	committed := err == nil
	for _, p := range files {
		tmp := repairPath(p)
		if _, err := os.Stat(tmp); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if committed {
			if err := os.Rename(tmp, p); err != nil {
				return fmt.Errorf("finish the interrupted repair of %s: %w", path, err)
			}
		} else if err := os.Remove(tmp); err != nil {
			return fmt.Errorf("remove the interrupted repair of %s: %w", path, err)
		}
	}
	if committed {
		if err := os.Remove(commitPath(path)); err != nil {
			return fmt.Errorf("finish the interrupted repair of %s: %w", path, err)
		}
	}
	return nil
}

// repairOutput rewrites the output at path without the rows in drop (sorted, all
// below the output's row count) and returns the id of the first row dropped. Its ids
// are at most maxID bytes: no longer line is read.
func repairOutput(path string, format Format, dim, maxID int, drop []int64) (json.RawMessage, error) {
	if format == FormatNPY {
		return repairNPY(path, dim, maxID+2, drop)
	}
	return repairJSONL(path, maxRecordBytes(dim, maxID), drop)
}

func repairJSONL(path string, maxLine int, drop []int64) (json.RawMessage, error) {
	in, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("repair: %w", err)
	}
	defer in.Close()
	tmp := repairPath(path)
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("repair: %w", err)
	}
	defer os.Remove(tmp) // fails harmlessly once renamed
	r, w := bufio.NewReaderSize(in, 1<<20), bufio.NewWriterSize(out, 1<<20)
	var first json.RawMessage
	for row := int64(0); ; row++ {
		line, err := readLine(r, maxLine)
		if errors.Is(err, io.EOF) && len(line) == 0 {
			break
		}
		if err != nil {
			out.Close()
			return nil, fmt.Errorf("repair: read %s: %w", path, err)
		}
		if len(drop) > 0 && drop[0] == row {
			drop = drop[1:]
			if first == nil {
				first, _, _ = parseJSONLRecord(line[:len(line)-1])
			}
			continue
		}
		w.Write(line)
	}
	if err := errors.Join(w.Flush(), out.Sync(), out.Close()); err != nil {
		return nil, fmt.Errorf("repair: write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("repair: %w", err)
	}
	return first, nil
}

func repairNPY(path string, dim, maxLine int, drop []int64) (json.RawMessage, error) {
	idsPath := IDsPath(path)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("repair: %w", err)
	}
	defer f.Close()
	ids, err := os.Open(idsPath)
	if err != nil {
		return nil, fmt.Errorf("repair: %w", err)
	}
	defer ids.Close()
	h := make([]byte, npyHeaderLen)
	if _, err := io.ReadFull(f, h); err != nil {
		return nil, fmt.Errorf("repair: read .npy header: %w", err)
	}
	rows, _, err := parseNPYHeader(h)
	if err != nil {
		return nil, fmt.Errorf("repair: %w", err)
	}
	tmp, tmpIDs := repairPath(path), repairPath(idsPath)
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("repair: %w", err)
	}
	defer os.Remove(tmp)
	outIDs, err := os.OpenFile(tmpIDs, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		out.Close()
		return nil, fmt.Errorf("repair: %w", err)
	}
	defer os.Remove(tmpIDs)
	kept := rows - int64(len(drop))
	w, iw := bufio.NewWriterSize(out, 1<<20), bufio.NewWriter(outIDs)
	form := npyIDsForm(h)
	w.Write(npyHeader(kept, dim, form))
	r, ir := bufio.NewReaderSize(f, 1<<20), bufio.NewReader(ids)
	vec := make([]byte, dim*4)
	var first json.RawMessage
	for row := int64(0); row < rows; row++ {
		if _, err := io.ReadFull(r, vec); err != nil {
			err = fmt.Errorf("repair: read %s row %d: %w", path, row, err)
			return nil, errors.Join(err, out.Close(), outIDs.Close())
		}
		id, err := readLine(ir, maxLine)
		if err != nil {
			err = fmt.Errorf("repair: read %s line %d: %w", idsPath, row+1, err)
			return nil, errors.Join(err, out.Close(), outIDs.Close())
		}
		if len(drop) > 0 && drop[0] == row {
			drop = drop[1:]
			if first == nil {
				// For the log, as the file holds it.
				first = append(json.RawMessage(nil), id[:len(id)-1]...)
			}
			continue
		}
		w.Write(vec)
		iw.Write(id)
	}
	if err := errors.Join(w.Flush(), iw.Flush(), out.Sync(), outIDs.Sync(), out.Close(), outIDs.Close()); err != nil {
		return nil, fmt.Errorf("repair: write %s: %w", tmp, err)
	}
	marker, err := os.Create(commitPath(path))
	if err != nil {
		return nil, fmt.Errorf("repair: %w", err)
	}
	if err := errors.Join(marker.Sync(), marker.Close()); err != nil {
		return nil, fmt.Errorf("repair: %w", err)
	}
	return first, finishRepair(path, FormatNPY)
}
