package joinshift.hadoop;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsAction;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system without its per-file processes. Without Hadoop's native library
 * (pyspark ships none), RawLocalFileSystem starts a {@code chmod} process after every file it
 * creates and a {@code readlink} process whenever it checks a path for a symlink. Java's own
 * file API does both in this process: same result, no process.
 */
public class NioRawLocalFileSystem extends RawLocalFileSystem {

  @Override
  public void setPermission(Path p, FsPermission permission) throws IOException {
    try {
      Files.setPosixFilePermissions(pathToFile(p).toPath(), posix(permission));
    } catch (NoSuchFileException e) {
      throw new FileNotFoundException("File " + p + " does not exist");
    } catch (UnsupportedOperationException e) {
      super.setPermission(p, permission); // not a POSIX file system: Hadoop's own way
    }
  }

  @Override
  public FileStatus getFileLinkStatus(Path f) throws IOException {
    if (!Files.isSymbolicLink(pathToFile(f).toPath())) {
      return getFileStatus(f); // not a link (or missing: FileNotFoundException), as Hadoop's own answers
    }
    return super.getFileLinkStatus(f);
  }

  static Set<PosixFilePermission> posix(FsPermission permission) {
    Set<PosixFilePermission> out = EnumSet.noneOf(PosixFilePermission.class);
    add(out, permission.getUserAction(), PosixFilePermission.OWNER_READ, PosixFilePermission.OWNER_WRITE,
        PosixFilePermission.OWNER_EXECUTE);
    add(out, permission.getGroupAction(), PosixFilePermission.GROUP_READ, PosixFilePermission.GROUP_WRITE,
        PosixFilePermission.GROUP_EXECUTE);
    add(out, permission.getOtherAction(), PosixFilePermission.OTHERS_READ, PosixFilePermission.OTHERS_WRITE,
        PosixFilePermission.OTHERS_EXECUTE);
    return out;
  }

  private static void add(Set<PosixFilePermission> out, FsAction a, PosixFilePermission r, PosixFilePermission w,
      PosixFilePermission x) {
    if (a.implies(FsAction.READ)) out.add(r);
    if (a.implies(FsAction.WRITE)) out.add(w);
    if (a.implies(FsAction.EXECUTE)) out.add(x);
  }
}
