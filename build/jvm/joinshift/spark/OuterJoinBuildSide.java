package joinshift.spark;

import org.apache.spark.sql.catalyst.plans.JoinType;
import org.apache.spark.sql.catalyst.plans.LeftOuter$;
import org.apache.spark.sql.catalyst.plans.RightOuter$;
import org.apache.spark.sql.catalyst.plans.logical.HintInfo;
import org.apache.spark.sql.catalyst.plans.logical.Join;
import org.apache.spark.sql.catalyst.plans.logical.JoinHint;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.PREFER_SHUFFLE_HASH$;
import org.apache.spark.sql.catalyst.rules.Rule;
import scala.Function1;
import scala.Option;
import scala.runtime.AbstractPartialFunction;

/**
 * An outer join that AQE may join by hash on either side builds its inner side.
 *
 * <p>AQE's {@code DynamicJoinSelection} marks each side of a shuffled join whose every partition is
 * under {@code spark.sql.adaptive.maxShuffledHashJoinLocalMapThreshold} "prefer shuffle hash", and
 * the planner then builds the smaller of the two. For a left outer join that is often the left (the
 * outer) side, which the join must also track: which build rows matched, and a scan for the rest at
 * the end. When both sides fit, this rule keeps the mark on the inner side only, so the hash table is
 * built from it: the same guard (every build partition under the threshold), no tracking. A right
 * outer join likewise keeps the mark on its left. Inner and full outer joins are left as they are.
 *
 * <p>AQE runs it after {@code DynamicJoinSelection}, each time it re-plans (the batch of runtime
 * rules an extension injects). {@code spark.sql.adaptive.optimizer.excludedRules} naming
 * {@code joinshift.spark.OuterJoinBuildSide} turns it off for a session.
 */
public class OuterJoinBuildSide extends Rule<LogicalPlan> {
  @Override
  public LogicalPlan apply(LogicalPlan plan) {
    return plan.transformUp(new AbstractPartialFunction<LogicalPlan, LogicalPlan>() {
      @Override
      public boolean isDefinedAt(LogicalPlan p) {
        return innerSideBuilt(p) != p;
      }

      @Override
      public <A1 extends LogicalPlan, B1> B1 applyOrElse(A1 p, Function1<A1, B1> fallback) {
        LogicalPlan out = innerSideBuilt(p);
        @SuppressWarnings("unchecked")
        B1 changed = (B1) out;
        return out != p ? changed : fallback.apply(p);
      }
    });
  }

  /** The outer join with its outer side's mark dropped; {@code p} itself where the rule does not apply. */
  static LogicalPlan innerSideBuilt(LogicalPlan p) {
    if (!(p instanceof Join j) || !prefersHash(j.hint().leftHint()) || !prefersHash(j.hint().rightHint())) {
      return p;
    }
    JoinType t = j.joinType();
    JoinHint h = j.hint();
    JoinHint hint;
    if (t == LeftOuter$.MODULE$) {
      hint = new JoinHint(Option.empty(), h.rightHint());
    } else if (t == RightOuter$.MODULE$) {
      hint = new JoinHint(h.leftHint(), Option.empty());
    } else {
      return p;
    }
    return j.copy(j.left(), j.right(), t, j.condition(), hint);
  }

  /** The side's hint is AQE's mark and nothing else. */
  static boolean prefersHash(Option<HintInfo> side) {
    return side.isDefined() && side.get().strategy().isDefined()
        && side.get().strategy().get() == PREFER_SHUFFLE_HASH$.MODULE$;
  }
}
