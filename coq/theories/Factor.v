(** Prime factorisation by trial division, used to refine every mesh axis
    into sub-axes of prime size. *)
From Coq Require Import List Arith Lia Sorted.
From VS Require Import Prelude.
Import ListNotations.

(** Trial division of [n] by [d, d+1, ...] while [d * d <= n], dividing out
    each divisor as often as it goes; what is left once [n < d * d] is 1 or a
    prime. Each call either stops or lowers [n - d], so [fuel > n - d]
    suffices ([trial_spec]); the [0] case is never reached then. *)
Fixpoint trial (fuel n d : nat) : list nat :=
  match fuel with
  | 0 => [n]
  | S f =>
      if n <? d * d then (if n =? 1 then [] else [n])
      else if n mod d =? 0 then d :: trial f (n / d) d
      else trial f n (S d)
  end.

(** Prime factors with multiplicity, nondecreasing; none for 0 and 1. *)
Definition factors (n : nat) : list nat := if n <? 2 then [] else trial n n 2.

(** The product is [n] whatever the fuel: every divisor taken out is put back. *)
Lemma trial_prod : forall fuel n d, prod (trial fuel n d) = n.
Proof.
  induction fuel as [|f IH]; intros n d; cbn [trial].
  - unfold prod. simpl. lia.
  - destruct (n <? d * d).
    + destruct (Nat.eqb_spec n 1) as [->|Hn]; unfold prod; simpl; lia.
    + destruct (Nat.eqb_spec (n mod d) 0) as [Hm|Hm]; [|apply IH].
      change (prod (d :: trial f (n / d) d)) with (d * prod (trial f (n / d) d)).
      rewrite IH. destruct (Nat.eq_dec d 0) as [->|Hd]; [simpl in Hm; lia|].
      pose proof (Nat.div_mod n d Hd). lia.
Qed.

Theorem factors_prod : forall n, 0 < n -> prod (factors n) = n.
Proof.
  intros n Hn. unfold factors. destruct (Nat.ltb_spec n 2) as [Hlt|Hge].
  - replace n with 1 by lia. reflexivity.
  - apply trial_prod.
Qed.

(** The invariant of trial division: [n] has no divisor in [\[2, d)]. *)
Definition no_small_div (n d : nat) : Prop := forall k, 2 <= k < d -> ~ Nat.divide k n.

(** A number at least 2 without divisors in [\[2, d)] and below [d * d] is
    prime: a proper factorisation [k * j] has a factor below [d]. *)
Lemma prime_below_square : forall n d, 2 <= n -> n < d * d -> no_small_div n d -> is_prime n.
Proof.
  intros n d Hn Hsq Hnd. split; [lia|]. intros k [j Hj].
  destruct (Nat.eq_dec k 0) as [->|Hk0]; [lia|].
  destruct (Nat.eq_dec j 0) as [->|Hj0]; [lia|].
  destruct (Nat.eq_dec k 1) as [->|Hk1]; [auto|].
  destruct (Nat.eq_dec j 1) as [->|Hj1]; [right; lia|].
  exfalso. destruct (Nat.le_gt_cases d k) as [Hdk|Hkd].
  - destruct (Nat.le_gt_cases d j) as [Hdj|Hjd].
    + assert (d * d <= j * k) by (apply Nat.mul_le_mono; lia). lia.
    + apply (Hnd j); [lia|]. exists k. lia.
  - apply (Hnd k); [lia|]. exists j. exact Hj.
Qed.

(** The divisor [d] found first is prime: its own divisors would divide [n]. *)
Lemma prime_first_div : forall n d, 2 <= d -> Nat.divide d n -> no_small_div n d -> is_prime d.
Proof.
  intros n d Hd Hdn Hnd. split; [lia|]. intros k Hk.
  assert (Hkd : k <= d) by (apply Nat.divide_pos_le; [lia|exact Hk]).
  destruct (Nat.eq_dec k 0) as [->|Hk0].
  - apply Nat.divide_0_l in Hk. lia.
  - destruct (Nat.eq_dec k 1) as [->|Hk1]; [auto|].
    destruct (Nat.eq_dec k d) as [->|Hkd']; [auto|].
    exfalso. apply (Hnd k); [lia|]. eapply Nat.divide_trans; eauto.
Qed.

(** With enough fuel, every factor returned is a prime at least [d]. *)
Lemma trial_spec : forall fuel n d, 1 <= n -> 2 <= d -> n - d < fuel -> no_small_div n d ->
  forall e, In e (trial fuel n d) -> is_prime e /\ d <= e.
Proof.
  induction fuel as [|f IH]; intros n d Hn Hd Hf Hnd e He; [lia|]. cbn [trial] in He.
  destruct (Nat.ltb_spec n (d * d)) as [Hsq|Hsq].
  - destruct (Nat.eqb_spec n 1) as [_|Hn1]; [destruct He|].
    destruct He as [<-|[]].
    assert (Hp : is_prime n) by (apply (prime_below_square n d); auto; lia).
    split; auto. destruct (Nat.le_gt_cases d n) as [|Hnd']; auto.
    exfalso. apply (Hnd n); [lia|apply Nat.divide_refl].
  - assert (Hdn : d < n) by nia.
    destruct (Nat.eqb_spec (n mod d) 0) as [Hm|Hm].
    + assert (Hdiv : Nat.divide d n) by (apply Nat.mod_divide; lia).
      destruct He as [<-|He]; [split; [apply (prime_first_div n d); auto|lia]|].
      pose proof (Nat.div_mod n d ltac:(lia)) as Hdm.
      assert (Hq : d <= n / d) by (apply Nat.div_le_lower_bound; lia).
      assert (Hqn : n / d < n) by (apply Nat.div_lt; lia).
      apply (IH (n / d) d); auto; try lia.
      intros k Hk [j Hj]. apply (Hnd k Hk). exists (j * d). nia.
    + assert (Hnd' : no_small_div n (S d)).
      { intros k Hk Hkn. destruct (Nat.eq_dec k d) as [->|Hne].
        - apply Hm. apply Nat.mod_divide; [lia|exact Hkn].
        - apply (Hnd k); [lia|exact Hkn]. }
      destruct (IH n (S d) Hn ltac:(lia) ltac:(lia) Hnd' e He) as [Hp Hle].
      split; [exact Hp|lia].
Qed.

(** Under the same conditions the factors come in nondecreasing order. *)
Lemma trial_sorted : forall fuel n d, 1 <= n -> 2 <= d -> n - d < fuel -> no_small_div n d ->
  Sorted le (trial fuel n d).
Proof.
  induction fuel as [|f IH]; intros n d Hn Hd Hf Hnd; [lia|]. cbn [trial].
  destruct (Nat.ltb_spec n (d * d)) as [Hsq|Hsq].
  - destruct (n =? 1); repeat constructor.
  - assert (Hdn : d < n) by nia.
    destruct (Nat.eqb_spec (n mod d) 0) as [Hm|Hm].
    + pose proof (Nat.div_mod n d ltac:(lia)) as Hdm.
      assert (Hq : d <= n / d) by (apply Nat.div_le_lower_bound; lia).
      assert (Hqn : n / d < n) by (apply Nat.div_lt; lia).
      assert (Hnd' : no_small_div (n / d) d).
      { intros k Hk [j Hj]. apply (Hnd k Hk). exists (j * d). nia. }
      constructor; [apply IH; auto; lia|].
      destruct (trial f (n / d) d) as [|e rest] eqn:Ht; constructor.
      apply (trial_spec f (n / d) d); try lia; auto. rewrite Ht. left. reflexivity.
    + apply IH; auto; try lia.
      intros k Hk Hkn. destruct (Nat.eq_dec k d) as [->|Hne].
      * apply Hm. apply Nat.mod_divide; [lia|exact Hkn].
      * apply (Hnd k); [lia|exact Hkn].
Qed.

(** Nothing in [\[2, 2)]: the invariant holds at the start. *)
Lemma no_small_div_2 : forall n, no_small_div n 2.
Proof. intros n k Hk. lia. Qed.

Theorem factors_prime : forall n e, In e (factors n) -> is_prime e.
Proof.
  intros n e He. unfold factors in He. destruct (Nat.ltb_spec n 2) as [_|Hge]; [destruct He|].
  apply (trial_spec n n 2); auto using no_small_div_2; lia.
Qed.

Theorem factors_sorted : forall n, Sorted le (factors n).
Proof.
  intros n. unfold factors. destruct (Nat.ltb_spec n 2) as [_|Hge]; [constructor|].
  apply trial_sorted; auto using no_small_div_2; lia.
Qed.
